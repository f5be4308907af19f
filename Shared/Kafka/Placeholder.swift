enum KafkaPlaceholder {}
