"""4. What a session keeps and its rebuild (pure): identity, history, fingerprint, state, rebuild,
merge, turn log, hidden extract rounds."""
