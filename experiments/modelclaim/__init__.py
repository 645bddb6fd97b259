"""ModelClaim wake scenarios (``scenarios``), their deployment (``deployment``) and their runners
(``virtual``, ``live``)."""
