"""The timing engine's compiled core (:func:`.stream.run_block`), one module per SimPy module it
is the twin of (:mod:`specmd_sim.engine.sim`): :mod:`.events`, :mod:`.flows`,
:mod:`.copy_engines`, :mod:`.fetch`, :mod:`.stream`, :mod:`.tally`; :mod:`.state` lays out its
arrays."""
