print("bench server: not yet")
