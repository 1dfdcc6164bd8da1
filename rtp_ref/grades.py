"""The grades a conformance case can reach, weakest first: the words a platform table requires
(``[tolerances] required_grade``, a deviation's ``check``) and the suite grades with (rtp_ref.cases.checks).

Its own module on the lowest floor, beside ``errors``: the platform loader validates tables against it and must
not import the suite that grades (tests/test_import_graph.py states the floors).
"""

#: grades a case can reach, weakest first (``none``: not even ``layout``)
GRADES = ("layout", "numerics", "bit_exact")
