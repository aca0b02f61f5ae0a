#!/usr/bin/env bash
# The GPU image has torch, triton, click, rich, jinja2 and pyyaml but not pydantic (the bot's config)
# nor openai (the LLM client), nor the kernel targets' corpus (liger-kernel, helion): fetch their wheels (for the image's Python 3.12, x86-64) into .whl/, which
# scripts/gpu_check.sh installs when pydantic is missing. Carry `.whl` with the device call.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2> /dev/null || echo '/.whl/' >> .git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl pydantic==2.13.4 pydantic_core==2.46.4 annotated-types==0.7.0 typing-inspection==0.4.2 \
  typing_extensions==4.16.0 openai==3.57.0 anyio==4.16.0 httpx2==2.16.2 httpcore2==2.16.2 h11==0.16.0 \
  idna==3.20 jiter==0.19.0 sniffio==1.3.1 certifi==2026.10.19.post1 truststore==0.10.5 \
  liger-kernel==0.8.5 helion==1.5.1 filecheck==1.0.6 packaging==26.4 psutil==7.2.2
# helion 1.5.1 needs a newer torch than the GPU image's 2.11 (IntelGPUError); gpu_check.sh's kernels part
# falls back to an older Helion from here when the first does not import
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 -d .whl/helion-alt helion==1.4.0
ls .whl .whl/helion-alt
