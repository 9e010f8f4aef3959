"""Miss handling: what runs when a demanded expert is not resident, one module each,
registered in :data:`specmd_sim.policies.MISS`."""
