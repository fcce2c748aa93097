"""`strata bench`: every tier's benchmark plus the cascade's accuracy, in one report."""
