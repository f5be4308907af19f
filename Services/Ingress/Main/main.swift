print("ingress: not yet")
