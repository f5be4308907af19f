print("fulfillment: not yet")
