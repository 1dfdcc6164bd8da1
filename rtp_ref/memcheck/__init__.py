"""``rtp-ref memcheck``: NVIDIA compute-sanitizer over one call of every conformance case of a kernel.

The pieces, one concern each:

* ``plan`` — which cases run (the conformance suite's cases, named ``layout/case-id``);
* ``markers`` — the marker lines the driver prints around each case, so the parent can tell which
  case a sanitizer report belongs to;
* ``driver`` — the child process run under the sanitizer: one call of each case, synchronised;
* ``transcript`` — reads one child's output and attributes every sanitizer report to its case;
* ``runner`` — starts the children, ends hung ones, and starts a new child after one died;
* ``records`` — the per-case records and their table, JSON and Markdown forms.
"""
