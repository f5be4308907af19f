-- Outbound events: every change the app's other services may act on, written in the transaction
-- of the change (an outbox: nothing for a rolled-back change, nothing lost on a crash), then
-- published to OUTBOUND_EVENT_TOPIC and delivered to webhooks. `event_key` names the change
-- itself, so a fact redelivered, reordered or replayed adds nothing: each event once.
CREATE TABLE outbound_event (
    seq          bigserial PRIMARY KEY,
    id           text NOT NULL UNIQUE DEFAULT 'evt_' || replace(gen_random_uuid()::text, '-', ''),
    event_key    text NOT NULL UNIQUE,
    type         text NOT NULL,
    user_id      text NOT NULL,
    environment  text NOT NULL,
    occurred_at  timestamptz NOT NULL,
    -- Per user, strictly increasing in commit order (the user's counter row is locked until commit).
    sequence     bigint NOT NULL,
    data         jsonb NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- Set once the broker acknowledged the event on the outbound topic.
    published_at timestamptz,
    CONSTRAINT outbound_event_user_sequence_key UNIQUE (user_id, sequence)
);
CREATE INDEX outbound_event_unpublished_idx ON outbound_event (seq) WHERE published_at IS NULL;

CREATE TABLE outbound_event_sequence (
    user_id        text PRIMARY KEY,
    last_sequence  bigint NOT NULL
);
