"""Knowledge maintenance: the jobs beat runs (decay, consolidation, enrichment, reflection, embedding-cache
eviction), one module each, and `runs.py`, the job_runs bookkeeping that makes every run once per period,
resumable and observable."""
