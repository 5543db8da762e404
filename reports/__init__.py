"""Reports: tables (frame -> frame), plots (Axes in, Axes out), and one module writing files."""
