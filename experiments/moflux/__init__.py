"""The MoFlux protocol's runners: virtual time (``virtual``) and live on loopback (``live``)."""
