"""The config: `settings` (the vocabulary every module shares) and `schema_doc` (config/README.md from the schemas)."""
