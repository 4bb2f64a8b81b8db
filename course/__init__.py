"""Site support for the course book: the Chinese web font cut to the characters the pages use (`fonts`), the
style every figure is drawn in (`figures`), and the Sphinx extension that ties them into the build
(`sphinxext`)."""
