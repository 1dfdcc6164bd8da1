"""The behaviour suites of the env/CLI parser and of plugin loading, shipped so that an engine can run them against
its own code: ``rtp-ref check-args --impl MODULE:CALLABLE`` and ``rtp-ref check-plugins --impl MODULE:CALLABLE``
(rtp_ref.commands.check_suites). Each suite reaches an implementation only through a kit (``args/kit.py``,
``plugins/kit.py``); ``findings.py`` maps every test that pins a bug to the bug or review finding it covers.
"""
