"""What people read: report.md/html, plots, PR drafts and series, the progress log, the console and the live panel.

May import task, engines, checks, ledger and the leaves; never loop, evaluate or commands."""
