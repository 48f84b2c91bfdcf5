"""specpilot's local lab: a Kubernetes API emulator and the processes around it."""
