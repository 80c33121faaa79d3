"""The worker's room: what runs inside the user's process (instruments, jobs, the recorder,
light mode, the link to the sidecar)."""
