"""3. One compacting turn whatever the wire: the pipeline, the session turn (load, compact under
the lease, save), streamed rounds, saving."""
