"""The driver's room: what runs in the program that receives every worker's stream."""
