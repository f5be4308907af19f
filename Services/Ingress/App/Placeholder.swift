enum IngressAppPlaceholder {}
