//! Geometer's solver: MIG hardware catalog, geometries and the planner.
