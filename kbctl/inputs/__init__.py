"""Reading what users give kbctl: files and streams of bounded size and depth, YAML loaded with the line of
every node, and pydantic's errors turned into problems that name the file, the line and the field.

Manifests (kbctl.manifest), the configuration file (kbctl.userconfig), eval sets and BEIR datasets (kbctl.eval)
and structured source formats (kbctl.sources) all read through here, so one bound and one wording hold on every
route an input can arrive by.

    bounds      regular files and streams of bounded size; nesting depth
    yaml_lines  YAML documents with lines (yaml_budget: node, alias and document budgets; yaml_fast: libyaml;
                yaml_plain: plain data)
    problems    pydantic ValidationError -> ManifestProblem (file:line: field: message)
    redaction   the patterns that replace secrets and personal data in a question before it is kept
"""
