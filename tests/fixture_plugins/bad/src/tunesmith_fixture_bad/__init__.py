"""Plugins that are wrong on purpose: the conformance suite must catch each of them."""
