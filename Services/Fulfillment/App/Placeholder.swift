enum FulfillmentAppPlaceholder {}
