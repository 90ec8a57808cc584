-- Every table of the store in one ordered key space: `t` is the table
-- (`Table` in engine/mod.rs), `k` the key, compared bytewise.
CREATE TABLE kv (
    t smallint NOT NULL,
    k bytea NOT NULL,
    v bytea NOT NULL,
    PRIMARY KEY (t, k)
);
