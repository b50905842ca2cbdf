-- Which lost attempts the control plane lost (an API-server outage that let the worker's Lease lapse, an
-- operator restart, Postgres gone under the worker: reasons lease_lost / infra), as the operator decided
-- when it did not count them against maxAttempts. Kept on the attempt so `agentrun trace` and the
-- agentrun_attempts_ended metric (label cause) show the same attribution as the run's status.
ALTER TABLE agentrun_attempts ADD COLUMN control_plane boolean NOT NULL DEFAULT false;
