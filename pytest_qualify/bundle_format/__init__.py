"""The evidence bundle's format, on the ground floor: the ``summary.json`` schema (``schema``) and
``SHA256SUMS`` with the bundle's file names (``manifest``). Writers and readers of a bundle both
stand on it; it imports nothing of the package. No pytest here."""
