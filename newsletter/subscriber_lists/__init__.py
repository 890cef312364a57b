"""The operator's lists of subscribers: imported, exported and seeded from the config.

- :mod:`.csv_import`: subscribers from a CSV file, in batches (``subscribers import``);
- :mod:`.export`: the CSV export and one subscriber's whole record (``subscribers show``);
- :mod:`.from_config`: the config's ``subscribers:`` list put into the database.

May import: core, config, store, services, subscribe, bounces.
"""
