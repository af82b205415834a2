SELECT node, incarnation, renewals, bound_ms, claimed FROM "{table}_leases"
