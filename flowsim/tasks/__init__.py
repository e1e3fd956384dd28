"""The tasks flowsim simulates, each a package of its own."""
