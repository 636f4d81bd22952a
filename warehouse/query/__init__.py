"""The query layer: registry, SQL builder, SLA maths."""
