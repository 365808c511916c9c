"""A_new, the accuracy on the newest task's classes after it is learned: an rmconsole metric plug-in."""
