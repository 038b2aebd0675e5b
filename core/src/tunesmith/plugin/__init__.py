"""The plugin API: everything a backend or cache plugin needs from tunesmith's core (its other
modules may change freely). Being filled in: see issue 28."""
