"""What the web console (api/console/) reads and writes: pages of users, memories, sessions and the chart
series, each a fixed number of SQL queries, built on the same domain functions as the REST API."""
