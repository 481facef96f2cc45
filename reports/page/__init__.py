"""The report page: HTML and Markdown renderings of a built report."""
