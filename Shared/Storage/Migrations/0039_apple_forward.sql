-- Forwarding of Apple's notifications (APPLE_NOTIFICATION_FORWARD_URL, _SANDBOX_URL): each target
-- is an endpoint of kind APPLE_FORWARD, written from the configuration by the workers, so its
-- deliveries use the webhooks' table, senders, retries, DEAD state, admin views and address
-- policy. Outbound events go to WEBHOOK endpoints only; notifications to APPLE_FORWARD ones only.
ALTER TABLE webhook_endpoint
    ADD COLUMN kind text NOT NULL DEFAULT 'WEBHOOK' CHECK (kind IN ('WEBHOOK', 'APPLE_FORWARD'));
