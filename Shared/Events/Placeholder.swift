enum EventsPlaceholder {}
