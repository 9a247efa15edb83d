"""6. Out to the model: the client (URL and header rules, error mapping), the connection pool,
HTTP/1.1, providers."""
