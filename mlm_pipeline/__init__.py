"""mlm-pipeline's stable names for code outside this repository: :mod:`mlm_pipeline.plugin` is the module a
plugin package imports from (docs/design.md, "The public plugin API").  The rest of the tree (common/,
ventilator/, worker/, sink/, loader/, report/) is internal and may move between releases."""
