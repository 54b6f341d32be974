"""``--serve``: the app in web browsers for a classroom, as its own package.

``server.py`` runs textual-serve (one app per browser tab, fonts served locally, the page's own options);
``zygote.py`` is the app starter that has imported everything once and forks each tab's app, ``fork.py`` the
server's side of it, ``prepared.py`` the served scenario loaded, computed and first drawn once in the starter,
and ``compact.py`` the starter's memory laid out before it forks (each app then copies fewer of its pages).
"""
