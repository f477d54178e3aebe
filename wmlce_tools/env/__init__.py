"""``wml env`` and ``wml module``: curated specs, conda-lock lockfiles solved by py-rattler,
atomic create, correct clone (pip packages included), verify, export, conda-pack, modulefiles.

Modules: ``spec`` (spec model + loader), ``lock`` (solve + lockfile), ``create``, ``clone``,
``verify``, ``export``, ``pack``, ``modulefile``, ``activation`` (for ``wml submit --env``),
``locations`` (env names -> prefixes), ``installed`` (reading an env), ``staging`` (atomic
directories), ``relocate`` (prefix rewriting), ``pip_install``, ``progress``, ``cli``.

A layer with `schedulers` and `launchers` (it needs neither).  May import only the foundation
(`errors`, `resources_data`); never `site`, `layout` or anything above.
"""
