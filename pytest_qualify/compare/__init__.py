"""The promotion's comparisons: two deployments (a candidate and the incumbent, two recipes) compared
figure by figure across server boots with a named statistical method, their gate rows item by item,
and the A/B campaign that produces the boots. Above the evidence writers (it borrows report.html's
look), beside the self-test; no pytest here."""
