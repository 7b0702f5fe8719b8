"""What the process owns: its caches (:mod:`.workspace`), thread splits and BLAS limits
(:mod:`.threads`), loading the cached kernels (:mod:`.numba_cache`), memory and time
limits (:mod:`.resources`), environment checks (:mod:`.environment`), signals and the
fast exit (:mod:`.signals`), the standard streams the command line writes (:mod:`.streams`)."""
