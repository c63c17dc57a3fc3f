"""What each training framework writes, read natively.

One module per framework whose files need more than a key mapping: a ``prepare``
function that turns the raw columns of one file into what the framework means by them
(trained tokens, groups, which log-probs are which), each verified against the
framework's own source (cited in the module).
"""
