enum PostgresPlaceholder {}
