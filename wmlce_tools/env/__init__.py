"""``wml env`` and ``wml module``: curated specs, conda-lock lockfiles solved by py-rattler,
atomic create, correct clone (pip packages included), verify, export, conda-pack, modulefiles;
PyPI environments locked by uv into a PEP 751 pylock.toml and made into relocatable venvs; the
site's MPI inside an env.

Modules: ``spec`` (spec model + loader), ``spec_fields`` (what conda and PyPI specs share),
``pypi_spec``, ``pylock`` (uv lock + reading pylock.toml), ``venv`` (create/clone/pack a venv,
uv's cache check), ``site_mpi`` (the site profile's mpi_in_env; mpi4py's MPI library),
``lock`` (solve + lockfile), ``create``, ``clone``,
``verify``, ``export``, ``pack``, ``modulefile``, ``activation`` (for ``wml submit --env``),
``locations`` (env names -> prefixes), ``installed`` (reading an env), ``staging`` (atomic
directories), ``relocate`` (prefix rewriting), ``pip_install``, ``progress``, ``cli``.

A layer with `schedulers` and `launchers` (it needs neither).  May import only the foundation
(`errors`, `resources_data`); never `site`, `layout` or anything above.
"""
