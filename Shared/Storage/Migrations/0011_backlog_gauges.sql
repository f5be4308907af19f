-- The backlog gauges (BacklogStore) read the newest Production notification every few seconds:
-- without this index that is a scan of the whole event table each time. The other gauges use
-- the partial indexes of their statuses.
CREATE INDEX inbound_event_notification_received_idx ON inbound_event (environment, received_at)
    WHERE kind = 'notification';
