"""Learning without Forgetting (Li & Hoiem, ECCV 2016 / TPAMI 2017) as an rmconsole plug-in.

`params.py` declares the method (torch-free: rmconsole lists and validates it without importing
torch); `method.py` holds its hooks, imported when a run uses it.
"""
