"""The behaviour suites of the env/CLI parser and of plugin loading, shipped so that an engine can run them against
its own code: ``rtp-ref check-args --impl MODULE:CALLABLE`` and ``rtp-ref check-plugins --impl MODULE:CALLABLE``
(rtp_ref.commands.check_suites). Each suite reaches an implementation only through a kit (``args/kit.py``,
``plugins/kit.py``); ``findings.py`` maps every test that pins a bug to the bug or review finding it covers, and
``features.py`` lists what an implementation may lack and the tests that need each (those end absent there,
``absence.py``). The emulations of rtp-llm (its main branch, and PR #1266) and their adapters ship beside them.
"""
