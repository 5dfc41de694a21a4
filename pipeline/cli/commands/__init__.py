"""The command modules: command ``x`` of ``difficulty`` in ``x.py`` (its function ``x_cmd``), as in pip's
``commands/``. ``pipeline.cli.COMMANDS`` lists them; a command module imports the shared modules of
``pipeline.cli`` only, never another command's."""
