"""The lakehouse core: settings, the registry (declarations and naming rules), the lakehouse of the profile, Spark and the Iceberg catalog."""
