"""The GitHub front door: PR runs, ``/kernelopt`` commands, nightly sweeps, follow-up PRs.

Modules, one job each: ``events`` (payloads), ``affected`` (which targets a change touches),
``commands`` (comment grammar and who may command), ``runner`` (calling the engine),
``proposal`` (the git side: files and commits), ``gateway``/``dryrun`` (the GitHub side, or a
folder), ``checkout`` (what the tokenless run stage reads from local git), ``trusted`` (the
publish stage's re-validation of a results folder), ``render`` (markdown reports), ``actions_io``
(outputs, summary, annotations),
``flows`` and ``sweep`` (what happens per event), ``cli`` (the click commands).

This package may import the engine; the engine never imports it.
"""
