-- Runs keep their code (agent_operator.imagepin): the worker image a run was admitted with, and its digest
-- once the cluster reported one; later attempts of the same retry generation run exactly this image.
ALTER TABLE agentrun_runs
    ADD COLUMN worker_image text,
    ADD COLUMN image_digest text,
    ADD COLUMN image_generation integer NOT NULL DEFAULT 0;

-- The pin is the operator's record, like what it admitted: a worker (tenant role) may not rewrite it. The
-- admitted-columns guard that says so is redefined with these columns in 0009 (with the fork's column).
