"""1. Request in, response out: the app factory, the model routes and pass-through, the guard,
lifecycle, logging and metrics."""
