"""Predictors of upcoming experts, one module each, registered in
:data:`specmd_sim.policies.PREDICTORS`."""
