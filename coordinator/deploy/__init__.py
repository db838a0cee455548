"""`linkgrad deploy`: linkgrad put on every host of an experiment, from a wheelhouse built here."""
